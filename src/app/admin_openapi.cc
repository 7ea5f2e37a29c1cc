// The OpenAPI 3.1 document of the admin API (GET /admin/openapi.json). Checked against the
// real answers by tests/integration/clients/admin_api.test.mjs.
#include "admin_api.h"

namespace tollgate::app {

namespace {

constexpr std::string_view kDoc =
    R"json({
 "openapi": "3.1.0",
 "info": {
  "title": "tollgate admin API",
  "version": "1",
  "description": "Accounts, keys, usage and billing on tollgate's admin listener (server.admin_listen). Every route but this document and the Stripe webhook needs `Authorization: Bearer <admin token>`. Errors are {\"code\",\"message\"}."
 },
 "servers": [
  {
   "url": "/"
  }
 ],
 "security": [
  {
   "adminToken": []
  }
 ],
 "paths": {
  "/admin/accounts": {
   "post": {
    "operationId": "createAccount",
    "summary": "Create an account, optionally linked to its Stripe customer.",
    "parameters": [
     {
      "name": "Idempotency-Key",
      "in": "header",
      "required": false,
      "description": "A retry with the same key (within 24 h) gets the first answer again, with `Idempotent-Replayed: true`, and changes nothing.",
      "schema": {
       "type": "string",
       "minLength": 1,
       "maxLength": 255
      }
     }
    ],
    "requestBody": {
     "required": true,
     "content": {
      "application/json": {
       "schema": {
        "$ref": "#/components/schemas/NewAccount"
       }
      }
     }
    },
    "responses": {
     "201": {
      "description": "The account.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Account"
        }
       }
      }
     },
     "400": {
      "description": "Bad input: the message names the member or rule.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     },
     "409": {
      "description": "The account or customer exists already.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     },
     "422": {
      "description": "The Idempotency-Key was used within 24 h for a different request.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     },
     "501": {
      "description": "Not offered by this key store (cluster mode).",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     },
     "401": {
      "description": "No admin token, or not the configured one.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     },
     "403": {
      "description": "The admin API is off: the message says why (no token configured).",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     }
    }
   }
  },
  "/admin/accounts/{id}": {
   "get": {
    "operationId": "getAccount",
    "summary": "An account with its keys (never secrets).",
    "parameters": [
     {
      "name": "id",
      "in": "path",
      "required": true,
      "description": "Account name",
      "schema": {
       "type": "string"
      }
     }
    ],
    "responses": {
     "200": {
      "description": "The account.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Account"
        }
       }
      }
     },
     "404": {
      "description": "No such account or key.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     },
     "401": {
      "description": "No admin token, or not the configured one.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     },
     "403": {
      "description": "The admin API is off: the message says why (no token configured).",
      "content": {
       "application/json": {
        "schema": {
)json"
    R"json(         "$ref": "#/components/schemas/Error"
        }
       }
      }
     }
    }
   }
  },
  "/admin/accounts/{id}/suspend": {
   "post": {
    "operationId": "suspendAccount",
    "summary": "Suspend: billable calls of its keys answer the `suspended` tool error.",
    "parameters": [
     {
      "name": "id",
      "in": "path",
      "required": true,
      "description": "Account name",
      "schema": {
       "type": "string"
      }
     },
     {
      "name": "Idempotency-Key",
      "in": "header",
      "required": false,
      "description": "A retry with the same key (within 24 h) gets the first answer again, with `Idempotent-Replayed: true`, and changes nothing.",
      "schema": {
       "type": "string",
       "minLength": 1,
       "maxLength": 255
      }
     }
    ],
    "responses": {
     "200": {
      "description": "The account.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Account"
        }
       }
      }
     },
     "400": {
      "description": "Bad input: the message names the member or rule.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     },
     "404": {
      "description": "No such account or key.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     },
     "422": {
      "description": "The Idempotency-Key was used within 24 h for a different request.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     },
     "401": {
      "description": "No admin token, or not the configured one.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     },
     "403": {
      "description": "The admin API is off: the message says why (no token configured).",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     }
    }
   }
  },
  "/admin/accounts/{id}/resume": {
   "post": {
    "operationId": "resumeAccount",
    "summary": "Lift a suspension.",
    "parameters": [
     {
      "name": "id",
      "in": "path",
      "required": true,
      "description": "Account name",
      "schema": {
       "type": "string"
      }
     },
     {
      "name": "Idempotency-Key",
      "in": "header",
      "required": false,
      "description": "A retry with the same key (within 24 h) gets the first answer again, with `Idempotent-Replayed: true`, and changes nothing.",
      "schema": {
       "type": "string",
       "minLength": 1,
       "maxLength": 255
      }
     }
    ],
    "responses": {
     "200": {
      "description": "The account.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Account"
        }
       }
      }
     },
     "400": {
      "description": "Bad input: the message names the member or rule.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     },
     "404": {
      "description": "No such account or key.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     },
     "422": {
      "description": "The Idempotency-Key was used within 24 h for a different request.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     },
     "401": {
      "description": "No admin token, or not the configured one.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
)json"
    R"json(        }
       }
      }
     },
     "403": {
      "description": "The admin API is off: the message says why (no token configured).",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     }
    }
   }
  },
  "/admin/keys": {
   "post": {
    "operationId": "createKey",
    "summary": "A new key for an account on a plan; the key is in this answer only.",
    "parameters": [
     {
      "name": "Idempotency-Key",
      "in": "header",
      "required": false,
      "description": "A retry with the same key (within 24 h) gets the first answer again, with `Idempotent-Replayed: true`, and changes nothing.",
      "schema": {
       "type": "string",
       "minLength": 1,
       "maxLength": 255
      }
     }
    ],
    "requestBody": {
     "required": true,
     "content": {
      "application/json": {
       "schema": {
        "$ref": "#/components/schemas/NewKey"
       }
      }
     }
    },
    "responses": {
     "201": {
      "description": "The key, shown once.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/CreatedKey"
        }
       }
      }
     },
     "400": {
      "description": "Bad input: the message names the member or rule.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     },
     "404": {
      "description": "No such account or key.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     },
     "422": {
      "description": "The Idempotency-Key was used within 24 h for a different request.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     },
     "401": {
      "description": "No admin token, or not the configured one.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     },
     "403": {
      "description": "The admin API is off: the message says why (no token configured).",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     }
    }
   },
   "get": {
    "operationId": "listKeys",
    "summary": "Keys, of one account or all.",
    "parameters": [
     {
      "name": "account",
      "in": "query",
      "required": false,
      "schema": {
       "type": "string"
      }
     }
    ],
    "responses": {
     "200": {
      "description": "The keys.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/KeyList"
        }
       }
      }
     },
     "404": {
      "description": "No such account or key.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     },
     "401": {
      "description": "No admin token, or not the configured one.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     },
     "403": {
      "description": "The admin API is off: the message says why (no token configured).",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     }
    }
   }
  },
  "/admin/keys/{id}": {
   "patch": {
    "operationId": "changePlan",
    "summary": "Move a key to another plan (effective on its next request).",
    "parameters": [
     {
      "name": "id",
      "in": "path",
      "required": true,
      "description": "Key id (key_\u2026)",
      "schema": {
       "type": "string"
      }
     }
    ],
    "requestBody": {
)json"
    R"json(     "required": true,
     "content": {
      "application/json": {
       "schema": {
        "$ref": "#/components/schemas/PlanChange"
       }
      }
     }
    },
    "responses": {
     "200": {
      "description": "The key.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Key"
        }
       }
      }
     },
     "400": {
      "description": "Bad input: the message names the member or rule.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     },
     "404": {
      "description": "No such account or key.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     },
     "422": {
      "description": "The Idempotency-Key was used within 24 h for a different request.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     },
     "501": {
      "description": "Not offered by this key store (cluster mode).",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     },
     "401": {
      "description": "No admin token, or not the configured one.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     },
     "403": {
      "description": "The admin API is off: the message says why (no token configured).",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     }
    }
   }
  },
  "/admin/keys/{id}/revoke": {
   "post": {
    "operationId": "revokeKey",
    "summary": "Revoke a key (kept, flagged, for the record).",
    "parameters": [
     {
      "name": "id",
      "in": "path",
      "required": true,
      "description": "Key id (key_\u2026)",
      "schema": {
       "type": "string"
      }
     },
     {
      "name": "Idempotency-Key",
      "in": "header",
      "required": false,
      "description": "A retry with the same key (within 24 h) gets the first answer again, with `Idempotent-Replayed: true`, and changes nothing.",
      "schema": {
       "type": "string",
       "minLength": 1,
       "maxLength": 255
      }
     }
    ],
    "responses": {
     "200": {
      "description": "The key.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Key"
        }
       }
      }
     },
     "400": {
      "description": "Bad input: the message names the member or rule.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     },
     "404": {
      "description": "No such account or key.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     },
     "422": {
      "description": "The Idempotency-Key was used within 24 h for a different request.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     },
     "401": {
      "description": "No admin token, or not the configured one.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     },
     "403": {
      "description": "The admin API is off: the message says why (no token configured).",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     }
    }
   }
  },
  "/admin/keys/{id}/rotate": {
   "post": {
    "operationId": "rotateKey",
)json"
    R"json(    "summary": "A new key for the same account and plan; the old one keeps working for the grace period ([admin] rotate_grace_secs, default 86400 s, or grace_secs here).",
    "parameters": [
     {
      "name": "id",
      "in": "path",
      "required": true,
      "description": "Key id (key_\u2026)",
      "schema": {
       "type": "string"
      }
     },
     {
      "name": "Idempotency-Key",
      "in": "header",
      "required": false,
      "description": "A retry with the same key (within 24 h) gets the first answer again, with `Idempotent-Replayed: true`, and changes nothing.",
      "schema": {
       "type": "string",
       "minLength": 1,
       "maxLength": 255
      }
     }
    ],
    "requestBody": {
     "required": false,
     "content": {
      "application/json": {
       "schema": {
        "$ref": "#/components/schemas/Rotate"
       }
      }
     }
    },
    "responses": {
     "201": {
      "description": "The new key, shown once.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/RotatedKey"
        }
       }
      }
     },
     "400": {
      "description": "Bad input: the message names the member or rule.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     },
     "404": {
      "description": "No such account or key.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     },
     "422": {
      "description": "The Idempotency-Key was used within 24 h for a different request.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     },
     "501": {
      "description": "Not offered by this key store (cluster mode).",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     },
     "401": {
      "description": "No admin token, or not the configured one.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     },
     "403": {
      "description": "The admin API is off: the message says why (no token configured).",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     }
    }
   }
  },
  "/admin/usage": {
   "get": {
    "operationId": "usage",
    "summary": "An account's usage in a month, per key.",
    "parameters": [
     {
      "name": "account",
      "in": "query",
      "required": true,
      "schema": {
       "type": "string"
      }
     },
     {
      "name": "month",
      "in": "query",
      "required": false,
      "description": "YYYY-MM (UTC); default the current month",
      "schema": {
       "type": "string",
       "pattern": "^[0-9]{4}-[0-9]{2}$"
      }
     }
    ],
    "responses": {
     "200": {
      "description": "Usage.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Usage"
        }
       }
      }
     },
     "400": {
      "description": "Bad input: the message names the member or rule.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     },
     "404": {
      "description": "No such account or key.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     },
     "401": {
      "description": "No admin token, or not the configured one.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     },
     "403": {
)json"
    R"json(      "description": "The admin API is off: the message says why (no token configured).",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     }
    }
   }
  },
  "/admin/usage/export": {
   "get": {
    "operationId": "usageExport",
    "summary": "Billed usage of every account and key in a month, as the journals and month archives hold it.",
    "parameters": [
     {
      "name": "month",
      "in": "query",
      "required": true,
      "schema": {
       "type": "string",
       "pattern": "^[0-9]{4}-[0-9]{2}$"
      }
     },
     {
      "name": "format",
      "in": "query",
      "required": false,
      "schema": {
       "enum": [
        "json",
        "csv"
       ]
      }
     }
    ],
    "responses": {
     "200": {
      "description": "The export.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/UsageExport"
        }
       },
       "text/csv": {
        "schema": {
         "type": "string"
        }
       }
      }
     },
     "400": {
      "description": "Bad input: the message names the member or rule.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     },
     "401": {
      "description": "No admin token, or not the configured one.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     },
     "403": {
      "description": "The admin API is off: the message says why (no token configured).",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     }
    }
   }
  },
  "/admin/webhooks/stripe": {
   "post": {
    "operationId": "stripeWebhook",
    "summary": "Stripe events: signed with the endpoint secret (Stripe-Signature); suspend or resume the customer's account.",
    "security": [],
    "parameters": [
     {
      "name": "Stripe-Signature",
      "in": "header",
      "required": true,
      "schema": {
       "type": "string"
      }
     }
    ],
    "requestBody": {
     "required": true,
     "content": {
      "application/json": {
       "schema": {
        "type": "object"
       }
      }
     }
    },
    "responses": {
     "200": {
      "description": "Received (applied, or acknowledged and ignored).",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/WebhookAck"
        }
       }
      }
     },
     "400": {
      "description": "Bad signature, timestamp outside the tolerance, or not an event.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     },
     "403": {
      "description": "No webhook secret configured.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     },
     "409": {
      "description": "The event id was received within the last day.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     },
     "422": {
      "description": "No account has this customer.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     },
     "503": {
      "description": "Another change was being made (a public core never waits): deliver again.",
      "content": {
       "application/json": {
        "schema": {
         "$ref": "#/components/schemas/Error"
        }
       }
      }
     }
    }
   }
  },
  "/admin/openapi.json": {
   "get": {
    "operationId": "openapi",
    "summary": "This document.",
    "security": [],
)json"
    R"json(    "responses": {
     "200": {
      "description": "OpenAPI 3.1",
      "content": {
       "application/json": {
        "schema": {
         "type": "object"
        }
       }
      }
     }
    }
   }
  }
 },
 "components": {
  "securitySchemes": {
   "adminToken": {
    "type": "http",
    "scheme": "bearer",
    "description": "The admin token ([admin] token_env, token_file or token_sha256)."
   }
  },
  "schemas": {
   "Error": {
    "type": "object",
    "required": [
     "code",
     "message"
    ],
    "properties": {
     "code": {
      "type": "string"
     },
     "message": {
      "type": "string"
     }
    },
    "additionalProperties": false
   },
   "NewAccount": {
    "type": "object",
    "required": [
     "id"
    ],
    "properties": {
     "id": {
      "type": "string",
      "pattern": "^[A-Za-z0-9._-]{1,64}$"
     },
     "stripe_customer": {
      "type": "string",
      "pattern": "^[A-Za-z0-9._-]{1,64}$"
     }
    },
    "additionalProperties": false
   },
   "Account": {
    "type": "object",
    "required": [
     "id",
     "status",
     "stripe_customer",
     "keys"
    ],
    "properties": {
     "id": {
      "type": "string"
     },
     "status": {
      "enum": [
       "active",
       "suspended"
      ]
     },
     "stripe_customer": {
      "type": [
       "string",
       "null"
      ]
     },
     "keys": {
      "type": "array",
      "items": {
       "$ref": "#/components/schemas/Key"
      }
     }
    },
    "additionalProperties": false
   },
   "Key": {
    "type": "object",
    "required": [
     "id",
     "account",
     "plan",
     "created",
     "status",
     "expires"
    ],
    "properties": {
     "id": {
      "type": "string",
      "pattern": "^key_[0-9a-f]{16}$"
     },
     "account": {
      "type": "string"
     },
     "plan": {
      "type": "string"
     },
     "created": {
      "type": "string",
      "format": "date-time"
     },
     "status": {
      "enum": [
       "active",
       "suspended",
       "revoked",
       "expired"
      ]
     },
     "expires": {
      "type": [
       "string",
       "null"
      ],
      "format": "date-time"
     }
    },
    "additionalProperties": false
   },
   "KeyList": {
    "type": "object",
    "required": [
     "keys"
    ],
    "properties": {
     "keys": {
      "type": "array",
      "items": {
       "$ref": "#/components/schemas/Key"
      }
     }
    },
    "additionalProperties": false
   },
   "NewKey": {
    "type": "object",
    "required": [
     "account",
     "plan"
    ],
    "properties": {
     "account": {
      "type": "string"
     },
     "plan": {
      "type": "string"
     }
    },
    "additionalProperties": false
   },
   "CreatedKey": {
    "type": "object",
    "required": [
     "id",
     "key",
     "account",
     "plan",
     "created",
     "status"
    ],
    "properties": {
     "id": {
      "type": "string",
      "pattern": "^key_[0-9a-f]{16}$"
     },
     "key": {
      "type": "string",
      "pattern": "^tg_live_[0-9a-f]{40}$"
     },
     "account": {
      "type": "string"
     },
     "plan": {
      "type": "string"
     },
     "created": {
      "type": "string",
      "format": "date-time"
     },
     "status": {
      "const": "active"
     }
    },
    "additionalProperties": false
   },
   "RotatedKey": {
    "type": "object",
    "required": [
     "id",
     "key",
     "account",
     "plan",
     "created",
     "status",
     "replaces",
     "old_key_expires"
    ],
    "properties": {
     "id": {
      "type": "string",
      "pattern": "^key_[0-9a-f]{16}$"
     },
     "key": {
      "type": "string",
      "pattern": "^tg_live_[0-9a-f]{40}$"
     },
     "account": {
      "type": "string"
     },
     "plan": {
      "type": "string"
     },
     "created": {
      "type": "string",
      "format": "date-time"
     },
     "status": {
      "const": "active"
     },
     "replaces": {
      "type": "string"
     },
)json"
    R"json(     "old_key_expires": {
      "type": "string",
      "format": "date-time"
     }
    },
    "additionalProperties": false
   },
   "PlanChange": {
    "type": "object",
    "required": [
     "plan"
    ],
    "properties": {
     "plan": {
      "type": "string"
     }
    },
    "additionalProperties": false
   },
   "Rotate": {
    "type": "object",
    "properties": {
     "grace_secs": {
      "type": "integer",
      "minimum": 0,
      "maximum": 2592000
     }
    },
    "additionalProperties": false
   },
   "Usage": {
    "type": "object",
    "required": [
     "account",
     "month",
     "keys",
     "totals"
    ],
    "properties": {
     "account": {
      "type": "string"
     },
     "month": {
      "type": "string"
     },
     "keys": {
      "type": "array",
      "items": {
       "type": "object",
       "required": [
        "id",
        "plan",
        "overage_policy",
        "limit",
        "used",
        "remaining",
        "overage",
        "status"
       ],
       "properties": {
        "id": {
         "type": "string"
        },
        "plan": {
         "type": "string"
        },
        "overage_policy": {
         "enum": [
          "stop",
          "bill"
         ]
        },
        "limit": {
         "type": "integer"
        },
        "used": {
         "type": "integer"
        },
        "remaining": {
         "type": "integer"
        },
        "overage": {
         "type": "integer"
        },
        "status": {
         "enum": [
          "active",
          "suspended",
          "revoked",
          "expired"
         ]
        }
       },
       "additionalProperties": false
      }
     },
     "totals": {
      "$ref": "#/components/schemas/Totals"
     }
    },
    "additionalProperties": false
   },
   "Totals": {
    "type": "object",
    "required": [
     "used",
     "overage"
    ],
    "properties": {
     "used": {
      "type": "integer"
     },
     "overage": {
      "type": "integer"
     }
    },
    "additionalProperties": false
   },
   "UsageExport": {
    "type": "object",
    "required": [
     "month",
     "keys",
     "totals"
    ],
    "properties": {
     "month": {
      "type": "string"
     },
     "keys": {
      "type": "array",
      "items": {
       "type": "object",
       "required": [
        "account",
        "stripe_customer",
        "key_id",
        "plan",
        "overage_policy",
        "quota",
        "used",
        "overage"
       ],
       "properties": {
        "account": {
         "type": "string"
        },
        "stripe_customer": {
         "type": [
          "string",
          "null"
         ]
        },
        "key_id": {
         "type": "string"
        },
        "plan": {
         "type": "string"
        },
        "overage_policy": {
         "enum": [
          "stop",
          "bill",
          null
         ]
        },
        "quota": {
         "type": "integer"
        },
        "used": {
         "type": "integer"
        },
        "overage": {
         "type": "integer"
        }
       },
       "additionalProperties": false
      }
     },
     "totals": {
      "$ref": "#/components/schemas/Totals"
     }
    },
    "additionalProperties": false
   },
   "WebhookAck": {
    "type": "object",
    "required": [
     "received",
     "event",
     "action"
    ],
    "properties": {
     "received": {
      "const": true
     },
     "event": {
      "type": "string"
     },
     "action": {
      "enum": [
       "suspended",
       "resumed",
       "none"
      ]
     },
     "account": {
      "type": "string"
     }
    },
    "additionalProperties": false
   }
  }
 }
}
)json";

}  // namespace

std::string_view admin_openapi() { return kDoc; }

}  // namespace tollgate::app
