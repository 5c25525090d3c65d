// moeforge._core: the nanobind extension behind the moeforge Python package.
//
// C++ errors become the Python exceptions of moeforge.errors (InvalidArgument ->
// InvalidArgumentError, a ValueError with .argument; Unsupported ->
// UnsupportedError, a NotImplementedError; Device -> DeviceError, a RuntimeError
// with .cuda_code; ...). The classes live in Python so that they can inherit from
// the built-in exceptions; the translator looks them up when an error crosses.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "moeforge/errors.hpp"
#include "runtime/doctor.hpp"

namespace nb = nanobind;

namespace moeforge::py {
void bind_spec(nb::module_& m);
void bind_layer(nb::module_& m);

namespace {

const char* class_name(ErrorKind k) {
  switch (k) {
    case ErrorKind::InvalidArgument: return "InvalidArgumentError";
    case ErrorKind::Unsupported: return "UnsupportedError";
    case ErrorKind::Device: return "DeviceError";
    case ErrorKind::Compile: return "CompileError";
    case ErrorKind::Cache: return "CacheError";
    case ErrorKind::Io: return "IoError";
    case ErrorKind::Internal: return "InternalError";
  }
  return "MoeforgeError";
}

void raise(const Error& e) {
  try {
    nb::object cls = nb::module_::import_("moeforge.errors").attr(class_name(e.kind()));
    nb::dict extra;
    if (auto* ia = dynamic_cast<const InvalidArgument*>(&e)) extra["argument"] = ia->argument();
    if (auto* de = dynamic_cast<const DeviceError*>(&e)) extra["cuda_code"] = de->cuda_code();
    nb::object inst = cls(e.what(), to_string(e.kind()), e.exit_code(), **extra);
    PyErr_SetObject(cls.ptr(), inst.ptr());
  } catch (nb::python_error& pe) {
    // moeforge.errors could not be imported (a broken install): keep the message.
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
}

}  // namespace
}  // namespace moeforge::py

NB_MODULE(_core, m) {
  using namespace moeforge;
  m.doc() = "moeforge C++ core (nanobind). Use the moeforge package; names with a leading _ are internal.";
  m.attr("__version__") = MOEFORGE_VERSION;
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      py::raise(e);
    }
  });
  py::bind_spec(m);
  py::bind_layer(m);
  m.def(
      "_doctor_json",
      [](const std::string& model, bool run_selftest, bool choose_backend) {
        rt::DoctorOptions o;
        o.model = model;
        o.run_selftest = run_selftest;
        o.choose_backend = choose_backend;
        nb::gil_scoped_release release;
        return rt::doctor_report(o).dump();
      },
      nb::arg("model") = "mistral-small-4", nb::arg("run_selftest") = true, nb::arg("choose_backend") = true,
      "rt::doctor_report as JSON text (what `moeforge doctor --json` prints).");
}
