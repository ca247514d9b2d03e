"""The demo: a generated JPEG image-folder dataset and a short training run traced by lotus."""
