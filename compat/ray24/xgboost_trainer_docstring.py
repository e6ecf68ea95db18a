# Ported from the example in Ray 2.4.0's python/ray/train/xgboost/xgboost_trainer.py XGBoostTrainer docstring (the ray wheel on PyPI).
# Every changed line ends with a '# trainwire:' comment saying why; nothing else changed.
import ray

from trainwire.train.xgboost import XGBoostTrainer  # trainwire: import
from trainwire.air.config import ScalingConfig  # trainwire: import

train_dataset = ray.data.from_items(
    [{"x": x, "y": x + 1} for x in range(32)])
trainer = XGBoostTrainer(
    label_column="y",
    params={"objective": "reg:squarederror"},
    scaling_config=ScalingConfig(num_workers=2),  # trainwire: size (2 cores)
    datasets={"train": train_dataset}
)
result = trainer.fit()
