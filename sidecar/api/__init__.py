"""The only package that imports grpc or generated protobuf types."""
