"""The proposers, one module or package each; the registry (engine/speculation/registry.py) finds them."""
