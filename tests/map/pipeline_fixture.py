"""A user pipeline for `lotus map run --pipeline tests/map/pipeline_fixture.py:PIPELINE` (one op raises)."""

import torchvision.transforms as T


class Boom:
    def __call__(self, x):
        raise RuntimeError("boom on purpose")


PIPELINE = T.Compose([T.RandomResizedCrop(224), Boom(), T.ToTensor()])
NOT_A_PIPELINE = 42
