"""Ray placement of the train, rollout and teacher roles (docs/ray.md); imported only by `--use_ray true` runs."""
