"""The MindSpore halves of the tasks beyond the dump: free benchmark perturbations and re-runs."""
