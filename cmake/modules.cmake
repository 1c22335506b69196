# seqto_module(NAME <name> DEPS <seqto modules...> LIBS <external targets...> SOURCES <files...>)
#
# Declares one layer of seqto as a static library `seqto_<name>`. The layering of
# ARCHITECTURE.md is enforced here: at configure time every `#include "<module>/..."`
# in the module's sources and headers is checked against the modules it declares
# (directly or through its dependencies). An include that points upward or sideways
# is a configure error that names the file and the include.
set(SEQTO_MODULES core ir onnxio ops rewrite runtime runners data eval quant tune cli CACHE INTERNAL "")

function(seqto_module)
  cmake_parse_arguments(M "" "NAME" "DEPS;LIBS;SOURCES" ${ARGN})
  set(allowed ${M_NAME})
  foreach(dep IN LISTS M_DEPS)
    list(APPEND allowed ${dep})
    get_property(dep_allowed GLOBAL PROPERTY SEQTO_ALLOWED_${dep})
    list(APPEND allowed ${dep_allowed})
  endforeach()
  list(REMOVE_DUPLICATES allowed)
  set_property(GLOBAL PROPERTY SEQTO_ALLOWED_${M_NAME} ${allowed})

  file(GLOB_RECURSE headers CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.h)
  foreach(file IN LISTS M_SOURCES headers)
    get_filename_component(abs ${file} ABSOLUTE)
    file(STRINGS ${abs} includes REGEX "^#include \"[a-z_]+/")
    foreach(line IN LISTS includes)
      string(REGEX REPLACE "^#include \"([a-z_]+)/.*" "\\1" target_module "${line}")
      if(target_module IN_LIST SEQTO_MODULES AND NOT target_module IN_LIST allowed)
        message(FATAL_ERROR "layering: ${abs} includes \"${target_module}/...\", "
                            "but module '${M_NAME}' may only use: ${allowed} (see ARCHITECTURE.md)")
      endif()
    endforeach()
  endforeach()

  add_library(seqto_${M_NAME} STATIC ${M_SOURCES})
  target_include_directories(seqto_${M_NAME} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  set(dep_targets)
  foreach(dep IN LISTS M_DEPS)
    list(APPEND dep_targets seqto_${dep})
  endforeach()
  target_link_libraries(seqto_${M_NAME} PUBLIC ${dep_targets} ${M_LIBS})
endfunction()
