-- wrk script of the proxy benchmark: one fixed request per case, read from
-- files prepared by run.sh, and a one-line JSON summary at the end.
--   wrk ... -s wrk.lua <url> -- <method> <path> <headers file> <body file>
-- The headers file has one "Name: value" per line.

local req

local function read_all(path)
  local f = assert(io.open(path, "rb"))
  local data = f:read("*a")
  f:close()
  return data
end

function init(args)
  local method, path, headers_file, body_file = args[1], args[2], args[3], args[4]
  local headers = {}
  for line in read_all(headers_file):gmatch("[^\r\n]+") do
    local name, value = line:match("^([^:]+):%s*(.*)$")
    if name then headers[name] = value end
  end
  req = wrk.format(method, path, headers, read_all(body_file))
end

function request()
  return req
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'JSON {"requests":%d,"duration_us":%d,"bytes":%d,"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"latency_us":{"p50":%d,"p90":%d,"p99":%d,"max":%d,"mean":%.1f}}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max, latency.mean))
end
