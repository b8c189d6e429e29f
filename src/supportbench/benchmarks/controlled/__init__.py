"""The controlled separation of localization and intervention (paper §5.2): targets, two equal-size interfaces
(a backbone column block and a peft LoRA), joint injection, outcome-blind storage scores, the adapter."""
