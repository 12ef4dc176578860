package main

import "google.golang.org/protobuf/types/known/timestamppb"

func timestamppbNow() *timestamppb.Timestamp { return timestamppb.Now() }
