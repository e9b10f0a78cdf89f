"""Learning-rate schedules: each a multiplier of the peak --lr by step (the engine's LambdaLR steps it). A run picks
one (Run.lr_multiplier); every run but Contrastive Tension takes the first."""


def linear_warmup_decay(step: int, total_steps: int, warmup: float) -> float:
    """Linear warm-up over the first `warmup` fraction of steps, then linear decay to 0."""
    warmup_steps = int(warmup * total_steps)
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))


# Contrastive Tension (Carlsson et al.) Appendix A.3, Table 5 (values from the authors' code): 1e-5 for 500 steps,
# then 8e-6, 6e-6, 4e-6, and 2e-6 from step 2000 on; as multipliers of the peak --lr (default 1e-5).
CT_LR_STEPS = ((500, 1.0), (1000, 0.8), (1500, 0.6), (2000, 0.4))
CT_LR_FINAL = 0.2


def contrastive_tension_steps(step: int) -> float:
    """Contrastive Tension's schedule: steps down every 500 steps (CT_LR_STEPS), whatever the run's length."""
    return next((multiplier for boundary, multiplier in CT_LR_STEPS if step < boundary), CT_LR_FINAL)
