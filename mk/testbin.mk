# placeholder: replaced by the test-bed work (Go tools modules under hack/testbin/)
TESTBIN_DIR := $(CACHE_DIR)/testbin
TESTBIN_ENV :=
.PHONY: testbin
testbin:
	@true
