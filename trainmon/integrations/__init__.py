"""Framework callbacks that mark steps, evaluation and checkpoints exactly instead of inferring them.

    from trainmon.integrations.lightning import TrainmonCallback        # Lightning
    from trainmon.integrations.huggingface import TrainmonCallback      # transformers.Trainer

Both attach the agent when the callback is created (a no-op if it already runs).
"""
