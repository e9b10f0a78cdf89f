"""The training loop, apart from what it trains: Engine.fit(run) runs any run (engine.py), told what a run is by
run.py, with its state and events (callbacks.py), logs (reporting.py), the command's set-up (command.py), --resume
(resume.py), torchrun (ddp.py), precision, learning-rate schedules and loss tracking, and the flags every trainer
shares (config.py). What it trains, and how, is in minbert/training/."""
