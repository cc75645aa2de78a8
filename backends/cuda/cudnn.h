// cuDNN for the vendor baselines, loaded at run time (libcudnn.so.9, through cudnn-frontend's
// dynamic loading): the binary starts without cuDNN, and its baselines are then unsupported with
// the reason. Graphs are built once per device and shape and kept; calls run on the device's
// stream. No CUDA or cuDNN header needed to include this (built with the CUDA backend only).
//
// Dimensions (cuDNN's MoE grouped matmul, mode NONE: tokens already sorted by expert).
//   E        experts (groups)
//   T        tokens (rows)
//   K        contraction extent
//   N        output features
#pragma once

#include <cstdint>
#include <string>

#include "backends/cuda/element.h"
#include "backends/device.h"

namespace tokamax::cuda {

// "" when libcudnn.so.9 loaded and is recent enough for the MoE grouped matmul (9.15); otherwise
// why not.
const std::string& cudnn_unavailable();
// "cuDNN 9.19.0 (libcudnn.so.9)", or why it is unavailable.
std::string cudnn_description();

// out[T, N] (row-major): rows [first_row[e], first_row[e + 1]) of token[T, K] times weight[e]
// of weight[E, K, N], the last expert's rows running to T; f32 accumulation. first_row is [E]
// int32 in device memory.
struct MoeMatmul {
  Element in = Element::kBF16;
  Element out = Element::kBF16;
  int64_t E = 0, T = 0, K = 0, N = 0;
};

// Whether cudnn-frontend accepts the graph for `sm_version` (90: Hopper), checked on the host
// without a device: "" or the frontend's message.
std::string moe_graph_error(const MoeMatmul& shape, int sm_version);
// Builds the graph's execution plan for `device` (a CUDA device) once per shape: "" when cuDNN
// has one, otherwise why not (no engine for this device or shape, cuDNN too old, ...).
std::string moe_plan_error(const Device& device, const MoeMatmul& shape);
// The workspace the plan needs, in bytes (after moe_plan_error returned "").
int64_t moe_workspace_bytes(const Device& device, const MoeMatmul& shape);
// Enqueues the call on the device's stream. Throws std::runtime_error with cuDNN's message.
void moe_grouped_matmul(const Device& device, const MoeMatmul& shape, const void* token,
                        const void* weight, const int32_t* first_row, void* out, void* workspace);

}  // namespace tokamax::cuda
