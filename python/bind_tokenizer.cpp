// Every tokenizer kind behind one class (xgrad.Tokenizer wraps it, python/xgrad/tokenizer.py): from a
// checkpoint's metadata or GPT-2's two files, encode (without the GIL), decode, size and kind.
#include "python/convert.hpp"
#include "train/gpt2_tokenizer.hpp"
#include "train/tokenizer.hpp"

namespace xgrad::python
{
namespace
{
// A handle rather than the polymorphic class itself: pybind11 would otherwise hand a byte vocabulary
// out as the ByteVocabulary class bound elsewhere, with another holder type.
struct tokenizer_handle
{
    std::shared_ptr<const train::tokenizer> t;

    std::string kind() const
    {
        if (dynamic_cast<const train::gpt2_tokenizer*>(t.get()))
        {
            return "gpt2";
        }
        return dynamic_cast<const train::sentencepiece_tokenizer*>(t.get()) ? "sentencepiece" : "bytes";
    }
};
} // namespace

void bind_tokenizer(py::module_& m)
{
    py::class_<tokenizer_handle>(m, "Tokenizer")
      .def_static("from_metadata",
                  [](const std::map<std::string, std::string>& metadata, const std::string& source)
                  { return tokenizer_handle{ train::tokenizer_from_metadata(metadata, source) }; })
      .def_static("from_gpt2_folder",
                  [](const std::string& folder)
                  { return tokenizer_handle{ train::gpt2_tokenizer::from_folder(folder) }; })
      .def_static("train_sentencepiece", // what --tokenizer bpe:N / unigram:N trains (for tests)
                  [](const std::string& text, const std::string& spec)
                  {
                      return tokenizer_handle{ train::sentencepiece_tokenizer::train(
                        train::tokenizer_spec::parse(spec), text) };
                  })
      .def("size", [](const tokenizer_handle& h) { return h.t->size(); })
      .def("kind", &tokenizer_handle::kind)
      .def("encode",
           [](const tokenizer_handle& h, const std::string& text)
           {
               py::gil_scoped_release free;
               return h.t->encode(text);
           })
      .def("decode",
           [](const tokenizer_handle& h, const std::vector<std::int32_t>& ids)
           { return py::bytes(h.t->decode(ids)); })
      .def("metadata",
           [](const tokenizer_handle& h)
           {
               train::metadata_map m;
               h.t->to_metadata(m);
               return m;
           });
}
} // namespace xgrad::python
