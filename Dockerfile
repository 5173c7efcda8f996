# The qosd node agent image used by examples/deploy (see README "Run on a cluster").
#   docker build -t <registry>/qosd:0.1.0 .
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY engine engine
COPY rules rules
COPY schemas schemas
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
USER 0
ENTRYPOINT ["qosd"]
CMD ["run"]
