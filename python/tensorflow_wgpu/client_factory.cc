// Registers a PJRT client factory for the `WGPU` device type in TensorFlow's
// PjrtClientFactoryRegistry, so that TensorFlow's NextPluggableDevice can create the client of
// the PJRT plugin that `libpjrt_wgpu.so` (TFNPD_InitPlugin + GetPjrtApi) registered.
//
// Why a C++ file: pip TensorFlow (checked on 2.21) registers client factories for CPU, GPU and
// XLA_GPU only, and does not ship `TF_CreateAndSetPjRtCApiClient` (the C API a plugin would call
// from TFNPD_InitPluginInternalDeviceStates), so without this a NextPluggableDevice op fails
// with "The PJRT client factory of `WGPU` is not registered". The registry and
// `xla::GetCApiClient` are exported C++ symbols of libtensorflow_cc.so.2, so this file is built
// against the installed TensorFlow's headers (tf.sysconfig flags), like a custom op library,
// by `python -m tensorflow_wgpu install`.
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "tensorflow/core/framework/registration/registration.h"
#include "xla/tsl/framework/device_type.h"

// Declarations of the exported functions used, as in TensorFlow's headers
// (xla/pjrt/c_api_client/pjrt_c_api_client.h, tensorflow/core/tfrt/common/
// pjrt_client_factory_registry.h). Those headers pull in MLIR's, which pip TensorFlow does not
// ship, so the few declarations are repeated here; the types only pass through.
namespace xla {
// Only passed through; the virtual destructor is, as in pjrt_client.h, its first virtual
// member, so a `delete` here (none is expected: TensorFlow owns the client) would dispatch
// to the real one.
class PjRtClient {
 public:
  virtual ~PjRtClient() = default;
};
class KeyValueStoreInterface;
struct PjrtClientFactoryOptions;
using PjRtValueType =
    std::variant<std::string, bool, int64_t, std::vector<int64_t>, float>;

absl::StatusOr<std::unique_ptr<PjRtClient>> GetCApiClient(
    std::string_view device_type,
    const absl::flat_hash_map<std::string, PjRtValueType>& create_options,
    std::shared_ptr<KeyValueStoreInterface> kv_store);

using PjrtClientFactory =
    std::function<absl::StatusOr<std::unique_ptr<PjRtClient>>(
        const PjrtClientFactoryOptions&)>;

class PjrtClientFactoryRegistry {
 public:
  tensorflow::InitOnStartupMarker RegisterPjrtClientFactory(
      const tsl::DeviceType& device_type,
      const PjrtClientFactory& client_factory);
  static PjrtClientFactoryRegistry& Get();
};
}  // namespace xla

namespace {

absl::StatusOr<std::unique_ptr<xla::PjRtClient>> CreateWgpuClient(
    const xla::PjrtClientFactoryOptions&) {
  // The PJRT_Api was registered for "WGPU" by TensorFlow when it loaded libpjrt_wgpu.so.
  return xla::GetCApiClient("WGPU", {}, nullptr);
}

const tensorflow::InitOnStartupMarker kRegistered =
    tensorflow::InitOnStartupMarker{} <<
    xla::PjrtClientFactoryRegistry::Get().RegisterPjrtClientFactory(
        tsl::DeviceType("WGPU"), CreateWgpuClient);

}  // namespace
