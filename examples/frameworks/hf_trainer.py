"""Hugging Face Trainer: it builds its DataLoaders (through Accelerate) from a Dataset."""

import torch
from common import Squares, model
from transformers import Trainer, TrainingArguments


class Wrapped(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = model()

    def forward(self, x, labels=None):
        out = self.net(x)
        loss = torch.nn.functional.mse_loss(out, labels) if labels is not None else None
        return {"loss": loss, "logits": out}


class DictSquares(Squares):
    def __getitem__(self, i):
        x, y = super().__getitem__(i)
        return {"x": x, "labels": y}


if __name__ == "__main__":
    args = TrainingArguments(output_dir="/tmp/lotus-hf-example", per_device_train_batch_size=32, num_train_epochs=2,
                             dataloader_num_workers=2, report_to=[], save_strategy="no", logging_strategy="no",
                             disable_tqdm=True, use_cpu=not torch.cuda.is_available())
    Trainer(model=Wrapped(), args=args, train_dataset=DictSquares()).train()
    print("hf trainer: done")
