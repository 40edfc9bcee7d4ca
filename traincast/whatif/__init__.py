"""What-if transforms on an execution graph (durations changed, structure kept)."""

from traincast.whatif.scale import scale_durations

__all__ = ["scale_durations"]
