"""Examples of user code that configs refer to by import path (``examples.custom_module:ResidualMLP``)."""
