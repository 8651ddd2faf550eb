"""What a change would do before it is made: the offline preview, its diff, the rollout classifiers, the up budget."""
