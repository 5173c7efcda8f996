"""One package per capability of the engine's middle (DESIGN "Layout").

Each feature folder owns its typed spec, its semantic checks, the facts it gathers, its pure math and
the intents it emits, so a newcomer finds where a decision is made from the folder name alone. The
tick (``engine.evaluate.engine``) calls the features' steps in one declared order.
"""
