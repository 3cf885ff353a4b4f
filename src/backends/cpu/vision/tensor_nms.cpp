// The NonMaxSuppression tensor kernel: boxes [B, N, 4], scores [B, C, N], optional scalars
// max_output_boxes_per_class (0 when absent: nothing is selected), iou_threshold (0) and
// score_threshold (none) -> selected [K, 3] i64 rows (batch, class, box), batch by batch and
// class by class, each class's boxes in the order they were selected. Per class: the boxes
// scoring above score_threshold, highest score first (ties: lower index first), are taken
// greedily unless their intersection-over-union with a box already taken exceeds iou_threshold.
// Boxes are corners [y1, x1, y2, x2] in either order (center_point_box 0) or [xc, yc, w, h] (1).
#include <algorithm>
#include <numeric>

#include "backends/cpu/tensor/tensor_kernel.h"

namespace kiln::cpu {
namespace {

using ir::Tensor;

struct Box {
  double y1, x1, y2, x2;
};

double iou(const Box& a, const Box& b) {
  const double ih = std::min(a.y2, b.y2) - std::max(a.y1, b.y1), iw = std::min(a.x2, b.x2) - std::max(a.x1, b.x1);
  if (ih <= 0 || iw <= 0) return 0.0;
  const double inter = ih * iw;
  const double area_a = (a.y2 - a.y1) * (a.x2 - a.x1), area_b = (b.y2 - b.y1) * (b.x2 - b.x1);
  const double uni = area_a + area_b - inter;
  return uni <= 0 ? 0.0 : inter / uni;
}

Status non_max_suppression(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor &boxes = *in[0], &scores = *in[1];
  if (boxes.rank() != 3 || boxes.shape()[2] != 4 || scores.rank() != 3 || scores.shape()[0] != boxes.shape()[0] ||
      scores.shape()[2] != boxes.shape()[1]) {
    return tensor_error(n, "boxes must be [B, N, 4] and scores [B, C, N]");
  }
  auto scalar = [&](size_t i) -> const Tensor* { return i < in.size() && in[i] != nullptr && in[i]->numel() > 0 ? in[i] : nullptr; };
  const int64_t max_out = scalar(2) ? ir::tensor_get_i64(*scalar(2), 0) : 0;
  const double iou_max = scalar(3) ? ir::tensor_get_f64(*scalar(3), 0) : 0.0;
  const bool has_min = scalar(4) != nullptr;
  const double score_min = has_min ? ir::tensor_get_f64(*scalar(4), 0) : 0.0;
  const bool center = n.attr_int("center_point_box", 0) != 0;
  const int64_t B = boxes.shape()[0], N = boxes.shape()[1], C = scores.shape()[1];
  std::vector<int64_t> selected;
  for (int64_t b = 0; b < B; ++b) {
    std::vector<Box> bx(static_cast<size_t>(N));
    for (int64_t i = 0; i < N; ++i) {
      double v[4];
      for (int k = 0; k < 4; ++k) v[k] = ir::tensor_get_f64(boxes, (b * N + i) * 4 + k);
      Box& o = bx[static_cast<size_t>(i)];
      if (center) {
        o = {v[1] - v[3] / 2, v[0] - v[2] / 2, v[1] + v[3] / 2, v[0] + v[2] / 2};
      } else {
        o = {std::min(v[0], v[2]), std::min(v[1], v[3]), std::max(v[0], v[2]), std::max(v[1], v[3])};
      }
    }
    for (int64_t c = 0; c < C; ++c) {
      std::vector<int64_t> order;
      std::vector<double> s(static_cast<size_t>(N));
      for (int64_t i = 0; i < N; ++i) {
        s[static_cast<size_t>(i)] = ir::tensor_get_f64(scores, (b * C + c) * N + i);
        if (!has_min || s[static_cast<size_t>(i)] > score_min) order.push_back(i);
      }
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t p, int64_t q) { return s[static_cast<size_t>(p)] > s[static_cast<size_t>(q)]; });
      std::vector<int64_t> taken;
      for (int64_t i : order) {
        if (static_cast<int64_t>(taken.size()) >= max_out) break;
        bool keep = true;
        for (int64_t t : taken) keep = keep && iou(bx[static_cast<size_t>(i)], bx[static_cast<size_t>(t)]) <= iou_max;
        if (!keep) continue;
        taken.push_back(i);
        selected.insert(selected.end(), {b, c, i});
      }
    }
  }
  Tensor y(ir::DType::kI64, {static_cast<int64_t>(selected.size() / 3), 3});
  std::copy(selected.begin(), selected.end(), y.mutable_data<int64_t>());
  out[0] = std::move(y);
  return Status::ok();
}

}  // namespace

void register_tensor_nms_kernels(TensorKernelTable& table) { table["NonMaxSuppression"] = non_max_suppression; }

}  // namespace kiln::cpu
