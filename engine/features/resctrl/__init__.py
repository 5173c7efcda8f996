"""Resource control (RDT): L3 cache ways and memory bandwidth per group, planned against the node's
CLOSIDs.
"""
