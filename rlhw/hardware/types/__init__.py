"""Built-in hardware types, one module each. Drop a module here to add a type (see registry.py)."""
