"""The proposers, one package each, whose `__init__` declares it (SPEC: names, needs, how to build;
no torch) and whose other modules draft; the registry (engine/speculation/registry.py) finds them.
base.py is what a proposer is, spec.py how one declares itself."""
