// Counts user callbacks running on the loop thread, so that a client closed from inside one of
// its own callbacks defers its teardown until the callback has returned.
#ifndef DLOCK_CORE_CALLBACK_SCOPE_H_
#define DLOCK_CORE_CALLBACK_SCOPE_H_

namespace dlock {

struct CallbackDepth {
  int depth = 0;  // loop thread only
};

class CallbackScope {
 public:
  explicit CallbackScope(CallbackDepth* d) : d_(d) { ++d_->depth; }
  ~CallbackScope() { --d_->depth; }
  CallbackScope(const CallbackScope&) = delete;
  CallbackScope& operator=(const CallbackScope&) = delete;

 private:
  CallbackDepth* d_;
};

}  // namespace dlock

#endif  // DLOCK_CORE_CALLBACK_SCOPE_H_
