# Ported from the example in Ray 2.4.0's python/ray/train/sklearn/sklearn_trainer.py SklearnTrainer docstring (the ray wheel on PyPI).
# Every changed line ends with a '# trainwire:' comment saying why; nothing else changed.
import ray

from trainwire.train.sklearn import SklearnTrainer  # trainwire: import
from sklearn.ensemble import RandomForestRegressor

train_dataset = ray.data.from_items(
    [{"x": x, "y": x + 1} for x in range(32)])
trainer = SklearnTrainer(
    estimator=RandomForestRegressor(),
    label_column="y",
    scaling_config=ray.air.config.ScalingConfig(
        trainer_resources={"CPU": 2}  # trainwire: size (2 cores)
    ),
    datasets={"train": train_dataset}
)
result = trainer.fit()
