"""The prompts and message builders of each model role (planner, executor, judge).

One builder per role, used by the service that serves the role and by the trainer, so the
trainer optimises exactly the tokens the service generates.
"""
