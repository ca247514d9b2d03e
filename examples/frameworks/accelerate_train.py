"""Accelerate: `accelerator.prepare` re-builds the DataLoader (DataLoaderShard) around the user's one."""

import torch
from accelerate import Accelerator
from common import Squares, model
from torch.utils.data import DataLoader

if __name__ == "__main__":
    acc = Accelerator()
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    loader = DataLoader(Squares(), batch_size=32, num_workers=2, shuffle=True)
    net, opt, loader = acc.prepare(net, opt, loader)
    for _ in range(2):
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(net(x), y)
            acc.backward(loss)
            opt.step()
            opt.zero_grad()
    print("accelerate: done", type(loader).__name__)
