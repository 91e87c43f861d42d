"""PNG plots a person would rather look at than read: training curves, attention heatmaps."""
