# Read by CTest (TEST_INCLUDE_FILES) after gtest_discover_tests' list, which it names
# moeforge_cpu_tests_TESTS. The tests matched here compile hundreds of kernels on every core
# (tests/cpu/test_runtime_support.hpp's parallel_for): one at a time, nothing beside them.
foreach(t IN LISTS moeforge_cpu_tests_TESTS)
  if(t MATCHES "CompileForEveryTarget|RuntimeCompileTarget")
    set_tests_properties("${t}" PROPERTIES RUN_SERIAL TRUE)
  endif()
endforeach()
