"""What a search's param_space may set: the SDK checks it early, the coordinator again (authoritatively)."""

# The keys of param_space a search may set, as Ray merges them into a Trainer.
ROOTS = ("train_loop_config", "params", "num_boost_round", "scaling_config")
# The ScalingConfig fields a param_space may set (min_workers: an elastic run's lower bound).
SCALING_FIELDS = (
    "num_workers",
    "min_workers",
    "use_gpu",
    "resources_per_worker",
    "trainer_resources",
    "placement_strategy",
)
