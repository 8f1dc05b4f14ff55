//===- ProgramBytes.h - Deterministic bytes of the program format ---------===//
//
// Shared by straitc (which writes programs, shards and plans) and the runtime
// (which writes them in tests and tools): one message, one byte string. Map
// fields (kernel attributes) are written in key order, not in hash order, so
// two compiles of one model write identical files.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_PROTO_PROGRAMBYTES_H
#define STRAIT_PROTO_PROGRAMBYTES_H

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/message_lite.h>

#include <fstream>
#include <string>

namespace strait {
namespace program {

/// Writes `message` to `path` deterministically; false if it cannot.
inline bool writeDeterministic(const google::protobuf::MessageLite &message,
                               const std::string &path) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    if (!message.SerializeToCodedStream(&coded))
      return false;
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  return out && out.write(bytes.data(), std::streamsize(bytes.size())) && out.flush();
}

} // namespace program
} // namespace strait

#endif // STRAIT_PROTO_PROGRAMBYTES_H
