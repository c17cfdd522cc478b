import torch
import torch.nn as nn
from torch.utils.cpp_extension import \
    load_inline

SRC = ("torch::Tensor neg(torch::Tensor x) "
       "{ return -x; }")

ext = load_inline(name="neg_ext",
		  cpp_sources=SRC,
		  functions=["neg"])

class ModelNew(nn.Module):
	def __init__(self):
		super().__init__()
		self.k = 1 + \
			2 + \
			3

	def forward(self, x):
		if x.dim() > 1 and \
		   x.is_contiguous():
			return ext.neg(x)
		return ext.neg(x.contiguous())
