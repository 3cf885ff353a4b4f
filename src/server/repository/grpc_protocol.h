// The KServe v2 gRPC messages (grpc_service.proto) to and from kiln's own values, apart from the
// transport (grpc_server.h): an infer request read and checked against the model's configuration
// with the same checks as the HTTP/JSON form (infer_protocol.h), inputs as raw_input_contents or
// typed contents; the response with every output in raw_output_contents, as Triton answers;
// model metadata and configuration. Pure functions; safe from any thread.
#pragma once

#include "server/repository/grpc_service.pb.h"
#include "server/repository/infer_protocol.h"
#include "server/repository/model_repository.h"

namespace kiln::server {

ApiResult<InferRequest> infer_request_from_grpc(const inference::ModelInferRequest& request, const ModelConfig& config);
void infer_response_to_grpc(const InferRequest& request, const TensorList& outputs, const TensorModel& model,
                            inference::ModelInferResponse& response);
void model_metadata_to_grpc(const TensorModel& model, inference::ModelMetadataResponse& response);
void model_config_to_grpc(const ModelConfig& config, kiln::repository::ModelConfig& proto);

}  // namespace kiln::server
