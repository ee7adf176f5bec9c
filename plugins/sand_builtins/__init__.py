"""Built-in SAND plugins: the paper's components, registered through the public hooks."""
