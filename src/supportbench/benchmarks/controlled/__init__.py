"""The controlled separation of localization and intervention (paper §5.2): targets, two equal-size
interfaces (a backbone block of MLP neurons and a peft LoRA), two-phase injection, outcome-blind
storage scores, the adapter."""
