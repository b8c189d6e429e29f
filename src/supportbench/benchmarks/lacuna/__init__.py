"""LACUNA (Boglioni et al. 2026): reader (upstream artifacts), generator (mini data and masks in the
same format, masked injection), localization precision, and the adapter."""
