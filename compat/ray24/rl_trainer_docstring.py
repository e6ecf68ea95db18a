# Ported from the online-training example in Ray 2.4.0's python/ray/train/rl/rl_trainer.py RLTrainer docstring (the ray wheel on PyPI).
# Every changed line ends with a '# trainwire:' comment saying why; nothing else changed.
from trainwire.air.config import RunConfig, ScalingConfig  # trainwire: import
from trainwire.train.rl import RLTrainer  # trainwire: import

trainer = RLTrainer(
    run_config=RunConfig(stop={"training_iteration": 2}),  # trainwire: size (5 iterations on 2 cores)
    scaling_config=ScalingConfig(num_workers=2, use_gpu=False, resources_per_worker={"CPU": 0.5}, trainer_resources={"CPU": 0.5}),  # trainwire: size (2 env runners, an evaluation runner and the algorithm on 2 cores)
    algorithm="PPO",
    config={
        "env": "CartPole-v0",
        "framework": "tf",
        "evaluation_num_workers": 1,
        "evaluation_interval": 1,
        "evaluation_config": {"input": "sampler"},
    },
)
result = trainer.fit()
