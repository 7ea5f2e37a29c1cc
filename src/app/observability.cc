#include "observability.h"

#include "tollgate/common/log.h"

namespace tollgate::app {

int setup_observability(shared_state& st, const config::settings& s, int cores) {
  std::vector<std::string_view> tools;
  for (size_t i = 0; i < st.tools.size(); ++i) {
    tools.push_back(st.tools.at(i).name);
  }
  st.metrics = std::make_unique<request_metrics>(cores, std::move(tools));
  st.public_metrics = s.public_metrics;
  if (!s.access_log.empty()) {
    auto log = access_log::open(s.access_log, s.log_sample);
    if (!log) {
      log_error("{}", log.error());
      return 2;
    }
    st.access = std::move(*log);
    log_info("access log: {}{}", s.access_log == "-" ? "stderr" : s.access_log,
             s.log_sample < 1.0
                 ? fmt::format(" (sample {} of successful requests; errors all)", s.log_sample)
                 : std::string());
  }
  return 0;
}

}  // namespace tollgate::app
