"""TOFU and Natural-TOFU: reader (upstream files), generator (mini data, same format), adapter."""
