"""The scaling plan: one node's step measured, the network probed, and the
prediction for more nodes (rules: workflow/rules/plan.smk)."""
