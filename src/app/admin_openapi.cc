// The OpenAPI 3.1 document of the admin API (GET /admin/openapi.json): docs/admin-openapi.json,
// byte for byte, embedded at build time (src/app/CMakeLists.txt). Checked against the real
// answers by tests/integration/clients/admin_api.test.mjs.
#include "admin_api.h"
#include "admin_openapi_doc.h"

namespace tollgate::app {

std::string_view admin_openapi() {
  return {generated::kAdminOpenapiJson, sizeof generated::kAdminOpenapiJson};
}

}  // namespace tollgate::app
