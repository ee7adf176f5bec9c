"""Built-in methods: what each iteration builds from the current agent (SAND and the paper's baselines)."""
