"""PyTorch Lightning: the Trainer builds and iterates its DataLoaders itself (`lotus run` traces them)."""

import lightning as L
import torch
from common import Squares, model
from torch.utils.data import DataLoader


class Regressor(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = model()

    def training_step(self, batch, _):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self):
        return DataLoader(Squares(), batch_size=32, num_workers=2, shuffle=True)


if __name__ == "__main__":
    trainer = L.Trainer(max_epochs=2, accelerator="auto", devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Regressor())
    print("lightning: done")
