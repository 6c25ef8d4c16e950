"""OWLv2 (google/owlv2-*): open-vocabulary object detection, served through `extract`."""
