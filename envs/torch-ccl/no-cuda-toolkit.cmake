# Included into torch-ccl's CMake project (CMAKE_PROJECT_INCLUDE, so it runs
# right after project() and before find_package(Torch)).
#
# Why: PyPI's torch 2.8.0 is the CUDA build. Its TorchConfig.cmake then
# looks for a CUDA toolkit to define torch::cudart, and find_package(Torch)
# aborts on a machine without one, although the CPU bindings never touch
# CUDA. An empty imported target in its place is all that the CPU build
# needs. With the CPU build of torch (download.pytorch.org/whl/cpu) this
# file is not used: build.py passes it only when torch.version.cuda is set.
if(NOT TARGET torch::cudart)
  add_library(torch::cudart INTERFACE IMPORTED)
endif()
