#include "base/thread_name.h"

#include <pthread.h>

#include <algorithm>
#include <cstring>
#include <string>

namespace kiln {

void set_current_thread_name(const char* name) {
  const std::string truncated(name, std::min<size_t>(std::strlen(name), 15));
  pthread_setname_np(pthread_self(), truncated.c_str());  // best effort: a name is only a label
}

}  // namespace kiln
