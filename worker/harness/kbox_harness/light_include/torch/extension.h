// kbox's light stand-in for <torch/extension.h> (docs/compile-speed.md).
//
// The compile stage first builds a candidate's extension with this directory
// as an extra `-I` path, so this file shadows torch's own extension.h (torch
// passes its include directories as `-isystem`, searched after `-I`), both
// for the line load_inline prepends to main.cpp and for the candidate's own
// includes. It includes a strict subset of what torch/extension.h includes:
// the tensor API (torch/types.h: ATen, the factories in namespace torch) and
// the headers torch/python.h takes its Python bindings from (pybind11, the
// tensor/device/dtype casters, torch::wrap_pybind_function). Left out: the
// C++ frontend of torch/all.h (nn, optim, data, jit, serialize, ...) and
// torch/python.h's nn::Module bindings, which candidates rarely use and which
// are most of the parsing time. A candidate that needs them fails to build
// here, and the compile stage builds it again exactly as it asked.
//
// Under nvcc in a light try that also uses per-operator headers
// (KBOX_CUDA_LIGHT, per_operator_headers.py), a CUDA source gets the tensor
// API only: the bindings are main.cpp's, and a CUDA source that uses pybind11
// fails the try and is built again as asked.
#pragma once

#include <torch/types.h>

#if !(defined(__CUDACC__) && defined(KBOX_CUDA_LIGHT))
#include <torch/csrc/Device.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/python_headers.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/csrc/utils/python_numbers.h>
#include <torch/csrc/utils/python_tuples.h>
#endif
