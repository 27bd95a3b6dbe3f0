"""Training a DFlash drafter for a target: prompts from installed source code (tasks.py, sources.py),
blocks of the target's own replies (blocks.py), the drafter's training forward (forward.py), the loop
with its checkpoints (trainer.py, checkpoint.py) and the acceptance it reaches (evaluate.py)."""
