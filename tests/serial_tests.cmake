# Read by CTest (TEST_INCLUDE_FILES) after gtest_discover_tests' list, which it names
# moeforge_cpu_tests_TESTS. The tests matched here compile hundreds of kernels on every core
# (tests/cpu/test_runtime_support.hpp's parallel_for): one at a time, nothing beside them, and
# with a longer limit (CompileForEveryTarget alone took 379 s of the 600 on a 2-core machine).
foreach(t IN LISTS moeforge_cpu_tests_TESTS)
  if(t MATCHES "CompileForEveryTarget|RuntimeCompileTarget")
    set_tests_properties("${t}" PROPERTIES RUN_SERIAL TRUE TIMEOUT 1800)
  endif()
endforeach()
