"""What the engine trains: the multi-task run (multitask.py, its flags in multitask_config.py, its schedules,
gradient surgery and SMART) and contrastive pretraining (contrastive.py, its methods' registry in methods.py, their
objectives, ConSERT, gradient caching)."""
