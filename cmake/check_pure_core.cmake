# Fails when a pure-core source includes Boost.Asio or Boost.Beast.
# The pure parts (identity, policy, telemetry parsers, engine model, workload)
# must build and test without the I/O engine; see "Layout" in README.md.
set(pure_dirs common config core telemetry engine workload evaluator)
foreach(dir IN LISTS pure_dirs)
  file(GLOB_RECURSE sources "${ROOT}/src/${dir}/*.h" "${ROOT}/src/${dir}/*.cpp")
  foreach(src IN LISTS sources)
    file(STRINGS "${src}" hits REGEX "#[ \t]*include[ \t]*[<\"]boost/(asio|beast)")
    if(hits)
      message(FATAL_ERROR "${src} includes Asio/Beast, but src/${dir} is pure core: ${hits}")
    endif()
  endforeach()
endforeach()
