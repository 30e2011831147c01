"""Data: tensor specs, replay buffers, and offline datasets."""
