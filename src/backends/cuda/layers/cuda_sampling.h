// Device sampling (runtime/device_sampling.h) on the GPU: the next token of each logits row,
// chosen where the logits are, so that a step copies back one id a row instead of the rows.
// One block of 1024 threads a row computes exactly the steps and roundings of
// runtime::sample_row(): the k-th largest logit and the top-p threshold are found by radix
// selection over the values' ordered bits (four passes of 8 bits, counting tokens or summing
// fixed-point masses), ties and the draw by prefix sums over each thread's run of ids. Integer
// sums make every decision independent of the order threads add in, so a row's token is the
// host reference's, whatever the batch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/device_sampling.h"

namespace kiln::cuda {

// The step's rows and lists, in device memory.
struct DeviceSamplingRows {
  const runtime::RowSampling* rows = nullptr;  // [num_rows]
  const int32_t* bias_tokens = nullptr;
  const float* bias_values = nullptr;
  const int32_t* penalty_tokens = nullptr;
  const int32_t* penalty_counts = nullptr;
  const uint64_t* mask_words = nullptr;  // the masked rows' allowed tokens
  int32_t mask_stride = 0;
};

// logits: [num_rows, vocab], overwritten (with each row's weights); ids: [num_rows], -1 for a
// row with no finite logit.
void launch_sample_rows(float* logits, int64_t num_rows, int64_t vocab, const DeviceSamplingRows& sampling,
                        int32_t* ids, cudaStream_t stream);

}  // namespace kiln::cuda
